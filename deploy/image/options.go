package image

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/spf13/pflag"
)

// DefaultRepository is the helm chart's default image.repository.
const DefaultRepository = "fleetview/fleetview"

// DefaultPlatforms are the platforms an image is built for by default.
var DefaultPlatforms = []string{"linux/amd64", "linux/arm64"}

// Options says what to build and where it goes.
type Options struct {
	// Dir is the module root (where go.mod is); the binary is built there.
	Dir string
	// Package is the main package to build, relative to Dir.
	Package string
	// Repository and Tag name the image (Tag empty: Version).
	Repository string
	Tag        string
	// Version is stamped into the binary (main.version); empty: the helm
	// chart's appVersion, so the chart's default image is this one.
	Version string
	// Commit is stamped into the binary (main.commit); empty: git HEAD of Dir.
	Commit string
	// Created is every timestamp in the image; zero: the commit's time.
	Created time.Time
	// Platforms, "os/arch".
	Platforms []string
	// Tarball is the OCI archive to write (empty: none); Push a registry
	// reference to push to (empty: none).
	Tarball string
	Push    string
}

// AddFlags registers the options' flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Dir, "dir", ".", "module root to build in")
	fs.StringVar(&o.Package, "package", "./cmd/fleetview", "main package of the image's binary")
	fs.StringVar(&o.Repository, "repository", DefaultRepository, "image repository (the name in the archive)")
	fs.StringVar(&o.Tag, "tag", "", "image tag (default: --version)")
	fs.StringVar(&o.Version, "version", "", "version stamped into the binary (default: the helm chart's appVersion)")
	fs.StringVar(&o.Commit, "commit", "", "commit stamped into the binary (default: git HEAD)")
	fs.StringSliceVar(&o.Platforms, "platform", DefaultPlatforms, "platforms, os/arch, comma-separated")
	fs.StringVar(&o.Tarball, "tarball", "", "write the image index as an OCI archive here (ctr -n k8s.io images import FILE)")
	fs.StringVar(&o.Push, "push", "", "push the image index to this reference, REGISTRY/REPO:TAG (credentials: ~/.docker/config.json)")
}

var platformRE = regexp.MustCompile(`^linux/(amd64|arm64|arm|ppc64le|s390x|riscv64)$`)

// Complete fills the defaults that come from the checkout: the commit and
// its time from git, the version from the chart's appVersion.
func (o *Options) Complete(ctx context.Context) error {
	if o.Dir == "" {
		o.Dir = "."
	}
	if o.Package == "" {
		o.Package = "./cmd/fleetview"
	}
	if o.Repository == "" {
		o.Repository = DefaultRepository
	}
	if len(o.Platforms) == 0 {
		o.Platforms = DefaultPlatforms
	}
	if o.Commit == "" {
		out, err := git(ctx, o.Dir, "rev-parse", "HEAD")
		if err != nil {
			return fmt.Errorf("%w: --commit not set and %v", ErrInvalidOptions, err)
		}
		o.Commit = out
	}
	if o.Created.IsZero() {
		out, err := git(ctx, o.Dir, "log", "-1", "--format=%ct", o.Commit)
		if err != nil {
			return fmt.Errorf("%w: the commit's time: %v", ErrInvalidOptions, err)
		}
		sec, err := strconv.ParseInt(out, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: the commit's time %q: %v", ErrInvalidOptions, out, err)
		}
		o.Created = time.Unix(sec, 0).UTC()
	}
	if o.Version == "" {
		v, err := ChartAppVersion(filepath.Join(o.Dir, "deploy/helm/fleetview/Chart.yaml"))
		if err != nil {
			return fmt.Errorf("%w: --version not set: %v", ErrInvalidOptions, err)
		}
		o.Version = v
	}
	if o.Tag == "" {
		o.Tag = o.Version
	}
	return nil
}

// Validate reports the first bad option, naming it.
func (o *Options) Validate() error {
	for _, p := range o.Platforms {
		if !platformRE.MatchString(p) {
			return fmt.Errorf("%w: --platform %q: want linux/<arch> (amd64, arm64, arm, ppc64le, s390x, riscv64)", ErrInvalidOptions, p)
		}
	}
	if len(o.Platforms) == 0 {
		return fmt.Errorf("%w: --platform: none given", ErrInvalidOptions)
	}
	if o.Version == "" || strings.ContainsAny(o.Version, " \t\n'\"") {
		return fmt.Errorf("%w: --version %q: want a non-empty word", ErrInvalidOptions, o.Version)
	}
	if o.Commit == "" || strings.ContainsAny(o.Commit, " \t\n'\"") {
		return fmt.Errorf("%w: --commit %q: want a non-empty word", ErrInvalidOptions, o.Commit)
	}
	if _, err := name.NewTag(o.Ref()); err != nil {
		return fmt.Errorf("%w: --repository/--tag %q: %v", ErrInvalidOptions, o.Ref(), err)
	}
	if o.Push != "" {
		if _, err := name.ParseReference(o.Push); err != nil {
			return fmt.Errorf("%w: --push %q: %v", ErrInvalidOptions, o.Push, err)
		}
	}
	if o.Created.IsZero() {
		return fmt.Errorf("%w: the image's creation time is not set", ErrInvalidOptions)
	}
	return nil
}

// Ref is the image's name, repository:tag.
func (o *Options) Ref() string { return o.Repository + ":" + o.Tag }

// ChartAppVersion reads appVersion from a Chart.yaml.
func ChartAppVersion(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "appVersion:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"'`), nil
		}
	}
	return "", fmt.Errorf("%s: no appVersion", path)
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
