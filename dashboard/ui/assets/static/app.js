// goray dashboard: refresh each section with its server-rendered fragment
// every few seconds (paused while the tab is hidden), and size the bars.
"use strict";
(function () {
  const every = Number(document.body.dataset.refreshMs) || 2000;
  const live = document.getElementById("live");

  function sizeBars(root) {
    root.querySelectorAll(".bar .fill[data-pct]").forEach(function (el) {
      el.style.width = el.dataset.pct + "%";
    });
  }

  async function refresh(part) {
    let url = "/ui/part/" + encodeURIComponent(part.dataset.part);
    if (part.dataset.filtered) {
      url += location.search;
    }
    const res = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    if (res.status === 401) {
      location.assign("/login");
      return;
    }
    if (!res.ok) {
      throw new Error(url + ": " + res.status);
    }
    const html = await res.text();
    if (part.innerHTML !== html) {
      part.innerHTML = html;
      sizeBars(part);
    }
  }

  let busy = false;
  async function tick() {
    if (busy || document.hidden) {
      return;
    }
    busy = true;
    try {
      await Promise.all(Array.from(document.querySelectorAll("[data-part]")).map(refresh));
      live.classList.remove("stale");
      live.textContent = "live · " + new Date().toLocaleTimeString();
      document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
    } catch (e) {
      live.classList.add("stale");
      live.textContent = "not refreshing: " + e.message;
    } finally {
      busy = false;
    }
  }

  sizeBars(document);
  setInterval(tick, every);
})();
