package opensearch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// build runs scripts/build-opensearch.sh and returns the directory it prints.
func build(ctx context.Context, opts Options, java string, logw io.Writer) (string, error) {
	root := opts.RepoRoot
	if root == "" {
		var err error
		if root, err = findRepoRoot(); err != nil {
			return "", err
		}
	}
	script := filepath.Join(root, buildScript)
	bash, err := exec.LookPath("bash")
	if err != nil {
		return "", fmt.Errorf("bash is needed to run %s: %w", script, err)
	}
	var stdout bytes.Buffer
	stderr := &tailBuffer{max: tailBytes}
	cmd := exec.CommandContext(ctx, bash, script)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "FLEETVIEW_JAVA="+java)
	if opts.CacheDir != "" {
		cmd.Env = append(cmd.Env, "FLEETVIEW_CACHE="+opts.CacheDir)
	}
	cmd.Stdout = &stdout
	cmd.Stderr = io.MultiWriter(stderr, logw)
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w\n%s", script, err, stderr.Last(errTailBytes))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	if dir == "" || !fileExists(filepath.Join(dir, "classpath.txt")) {
		return "", fmt.Errorf("%s printed %q, not a launcher directory\n%s", script, stdout.String(), stderr.Last(errTailBytes))
	}
	return dir, nil
}

func findJava(java string) (string, error) {
	if java == "" {
		if jh := os.Getenv("JAVA_HOME"); jh != "" {
			java = filepath.Join(jh, "bin", "java")
		} else {
			java = "java"
		}
	}
	p, err := exec.LookPath(java)
	if err != nil {
		return "", fmt.Errorf("java (17) is needed for the OpenSearch test node: %w", err)
	}
	return p, nil
}

func findRepoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, d := range starts {
		for {
			if fileExists(filepath.Join(d, "go.mod")) && fileExists(filepath.Join(d, buildScript)) {
				return d, nil
			}
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	return "", fmt.Errorf("cannot find the repository root (go.mod with %s) above %v; set Options.RepoRoot or Options.LauncherDir", buildScript, starts)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
