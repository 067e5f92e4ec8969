package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// buildScript is the script, relative to the module root, that builds
// kube-apiserver and etcd and prints the directory holding them.
const buildScript = "scripts/build-k8s.sh"

// BuildBinaries runs scripts/build-k8s.sh (found by walking up from the
// working directory to the directory holding go.mod) and returns the directory
// holding kube-apiserver and etcd. A cached build returns at once; a cold one
// takes about 5 minutes on 2 cores. Concurrent callers (for example several
// test packages) are serialised with a lock file next to the cache.
// Build output goes to logw when it is not nil.
func BuildBinaries(ctx context.Context, logw io.Writer) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	root, err := findModuleRoot(wd)
	if err != nil {
		return "", err
	}
	script := filepath.Join(root, buildScript)
	if _, err := os.Stat(script); err != nil {
		return "", fmt.Errorf("harness: build script: %w", err)
	}

	// Same cache location as the script.
	cache := os.Getenv("FLEETVIEW_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		cache = filepath.Join(home, ".cache", "fleetview")
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(ctx, filepath.Join(cache, ".build-k8s.lock"))
	if err != nil {
		return "", fmt.Errorf("harness: lock build: %w", err)
	}
	defer unlock()

	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Dir = root
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if logw != nil {
		cmd.Stderr = io.MultiWriter(&stderr, logw)
	}
	if err := cmd.Run(); err != nil {
		detail := "stderr (tail):\n" + lastLines(stderr.String(), 40)
		if out := strings.TrimSpace(stdout.String()); out != "" {
			detail += "\nstdout (tail):\n" + lastLines(out, 20)
		}
		return "", fmt.Errorf("harness: %s failed: %w\n%s", script, err, detail)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	if dir == "" {
		return "", fmt.Errorf("harness: %s printed no directory", script)
	}
	if err := checkBinaries(dir); err != nil {
		return "", fmt.Errorf("harness: %s: %w", script, err)
	}
	return dir, nil
}

func findModuleRoot(dir string) (string, error) {
	for d := dir; ; {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("harness: no go.mod above %s", dir)
		}
		d = parent
	}
}

func checkBinaries(dir string) error {
	var errs []error
	for _, b := range []string{"kube-apiserver", "etcd"} {
		st, err := os.Stat(filepath.Join(dir, b))
		if err != nil {
			errs = append(errs, err)
		} else if st.IsDir() || st.Mode()&0o111 == 0 {
			errs = append(errs, fmt.Errorf("%s is not an executable file", filepath.Join(dir, b)))
		}
	}
	return errors.Join(errs...)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
