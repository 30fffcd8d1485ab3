// Command benchrun is a temporary harness: it runs the microbenchmark.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"runtime/pprof"

	"github.com/goray-dev/goray/internal/bench"
	"github.com/goray-dev/goray/sdk/ray"
)

func main() {
	bench.MaybeServePlugin()
	if ray.IsWorker() {
		ray.Init(context.Background())
	}
	quick := flag.Bool("quick", false, "")
	filter := flag.String("filter", "", "")
	prof := flag.String("cpuprofile", "", "")
	js := flag.String("json", "", "")
	md := flag.String("md", "", "")
	flag.Parse()
	o := bench.Options{Quick: *quick, Log: os.Stderr}
	if *filter != "" {
		o.Filter = regexp.MustCompile(*filter)
	}
	if *prof != "" {
		f, _ := os.Create(*prof)
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	rep, err := bench.Run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rep.WriteTable(os.Stdout)
	if *js != "" {
		f, _ := os.Create(*js)
		rep.WriteJSON(f)
		f.Close()
	}
	if *md != "" {
		f, _ := os.Create(*md)
		rep.WriteMarkdown(f)
		f.Close()
	}
}
