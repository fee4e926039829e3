package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestFlagsPflag: the pflag command line keeps the flag package's
// behaviour: --version, negative durations as values, bare boolean keys
// and every flag as a config file key, the command line winning.
func TestFlagsPflag(t *testing.T) {
	if _, err := parseArgs([]string{"--version"}, io.Discard); !errors.Is(err, errVersion) {
		t.Errorf("--version: %v", err)
	}
	c, err := parseArgs([]string{"--fpdu-timeout", "-1s", "--web.config.file", "/w.yml", "--no-crc"}, io.Discard)
	if err != nil || c.FPDUTimeout != -time.Second || c.WebConfigFile != "/w.yml" || !c.NoCRC {
		t.Errorf("parsed %+v, %v", c, err)
	}
	f := filepath.Join(t.TempDir(), "xrnicd.conf")
	os.WriteFile(f, []byte("markers\nmax-ord 7\n--allow=10.0.0.0/8\nallow 10.1.0.0/16\nweb.config.file /x.yml\n"), 0o600)
	c, err = parseArgs([]string{"--config", f, "--max-ord", "9"}, io.Discard)
	if err != nil || !c.Markers || c.MaxORD != 9 || len(c.Allow) != 2 || c.WebConfigFile != "/x.yml" {
		t.Errorf("config file: %+v, %v", c, err)
	}
	os.WriteFile(f, []byte("max-ord seven\n"), 0o600)
	if _, err := parseArgs([]string{"--config", f}, io.Discard); err == nil || !strings.Contains(err.Error(), `invalid value "seven" for flag -max-ord`) {
		t.Errorf("bad config value: %v", err)
	}
	var help strings.Builder
	if _, err := parseArgs([]string{"-h"}, &help); !errors.Is(err, pflag.ErrHelp) || !strings.Contains(help.String(), "--version") {
		t.Errorf("-h: %v\n%s", err, help.String())
	}
}
