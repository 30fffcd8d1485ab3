package provider

import (
	"fmt"
	"log/slog"
	"strings"
)

// redacted replaces the cluster token wherever the SDK shows a NodeSpec or
// an error message.
const redacted = "<redacted>"

// minRedactLen is the shortest token RedactToken replaces: replacing a
// one- or two-letter string everywhere would garble messages, and goray's
// tokens are 64 hex digits.
const minRedactLen = 8

// RedactToken returns text with every occurrence of token replaced by
// "<redacted>". Providers use it on text that may echo the cluster token
// (a failed command's output) before it goes into a LaunchError or an
// error. Tokens shorter than 8 bytes are left alone (replacing them would
// garble the text; they are no real cluster token).
func RedactToken(text, token string) string {
	if len(token) < minRedactLen {
		return text
	}
	return strings.ReplaceAll(text, token, redacted)
}

// String shows the spec with AuthToken redacted.
func (s NodeSpec) String() string { return s.format(false) }

// GoString shows the spec as Go syntax with AuthToken redacted (%#v).
func (s NodeSpec) GoString() string { return s.format(true) }

// Format makes every fmt verb show the spec with AuthToken redacted: %#v
// as GoString, anything else as String.
func (s NodeSpec) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = fmt.Fprint(f, s.GoString())
		return
	}
	_, _ = fmt.Fprint(f, s.String())
}

// LogValue shows the spec in slog output with AuthToken redacted.
func (s NodeSpec) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("head_address", s.HeadAddress),
		slog.Any("resources", s.Resources),
		slog.Any("labels", s.Labels),
		slog.String("auth_token", s.tokenShown()),
		slog.Any("setup_commands", s.SetupCommands),
		slog.String("goray_binary", s.GorayBinary),
	)
}

func (s NodeSpec) tokenShown() string {
	if s.AuthToken == "" {
		return ""
	}
	return redacted
}

func (s NodeSpec) format(goSyntax bool) string {
	if goSyntax {
		return fmt.Sprintf("provider.NodeSpec{HeadAddress:%q, Resources:%#v, Labels:%#v, AuthToken:%q, SetupCommands:%#v, GorayBinary:%q}",
			s.HeadAddress, s.Resources, s.Labels, s.tokenShown(), s.SetupCommands, s.GorayBinary)
	}
	return fmt.Sprintf("{HeadAddress:%s Resources:%v Labels:%v AuthToken:%s SetupCommands:%q GorayBinary:%s}",
		s.HeadAddress, s.Resources, s.Labels, s.tokenShown(), s.SetupCommands, s.GorayBinary)
}

var (
	_ fmt.Formatter  = NodeSpec{}
	_ fmt.GoStringer = NodeSpec{}
	_ slog.LogValuer = NodeSpec{}
)
