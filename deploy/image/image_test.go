package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestOptionsValidate(t *testing.T) {
	valid := func() Options {
		return Options{Repository: DefaultRepository, Tag: "1.0.0", Version: "1.0.0", Commit: "abc",
			Created: time.Unix(1, 0), Platforms: []string{"linux/amd64"}}
	}
	cases := []struct {
		name   string
		mutate func(*Options)
		want   string
	}{
		{"valid", func(*Options) {}, ""},
		{"platform not linux", func(o *Options) { o.Platforms = []string{"darwin/arm64"} }, `--platform "darwin/arm64"`},
		{"platform without arch", func(o *Options) { o.Platforms = []string{"linux"} }, `--platform "linux"`},
		{"no platform", func(o *Options) { o.Platforms = nil }, "--platform: none given"},
		{"version with a space", func(o *Options) { o.Version = "1 0" }, `--version "1 0"`},
		{"no commit", func(o *Options) { o.Commit = "" }, `--commit ""`},
		{"bad tag", func(o *Options) { o.Tag = "a:b" }, `--repository/--tag "fleetview/fleetview:a:b"`},
		{"bad push reference", func(o *Options) { o.Push = "Registry/UPPER" }, `--push "Registry/UPPER"`},
		{"no time", func(o *Options) { o.Created = time.Time{} }, "creation time"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := valid()
			c.mutate(&o)
			err := o.Validate()
			if c.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate = %v, want ErrInvalidOptions naming %q", err, c.want)
			}
		})
	}
}

func TestCompleteDefaultsToTheChartsImage(t *testing.T) {
	o := Options{Dir: "../.."}
	if err := o.Complete(context.Background()); err != nil {
		t.Fatal(err)
	}
	app, err := ChartAppVersion("../../deploy/helm/fleetview/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if o.Ref() != "fleetview/fleetview:"+app || o.Version != app {
		t.Fatalf("default image %s version %s, want the chart's fleetview/fleetview:%s", o.Ref(), o.Version, app)
	}
	if len(o.Commit) != 40 || o.Created.IsZero() || o.Created.Year() < 2020 {
		t.Fatalf("commit %q created %v: want git HEAD and its time", o.Commit, o.Created)
	}
}

// TestImage builds fleetview's image twice from the same inputs and checks
// it is the same image (digest and archive bytes), for both platforms, with
// a non-root user, a CA bundle and no shell; that the amd64 binary, taken
// out of its layers, prints the stamped version; and that a push to a
// registry serves the same digest back.
func TestImage(t *testing.T) {
	ctx := context.Background()
	o := Options{Dir: "../..", Version: "0.0.0-imagetest", Commit: "0123456789abcdef0123456789abcdef01234567",
		Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	if err := o.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	var digests []v1.Hash
	var archives [][]byte
	var idx v1.ImageIndex
	for i := range 2 {
		var err error
		start := time.Now()
		idx, err = Build(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := WriteArchive(&buf, o.Ref(), idx, o.Created); err != nil {
			t.Fatal(err)
		}
		t.Logf("build %d: %s in %v", i+1, d, time.Since(start).Round(time.Second))
		digests, archives = append(digests, d), append(archives, buf.Bytes())
	}
	if digests[0] != digests[1] || !bytes.Equal(archives[0], archives[1]) {
		t.Fatalf("two builds of one commit differ: %s and %s (archives equal: %v)", digests[0], digests[1], bytes.Equal(archives[0], archives[1]))
	}

	// containerd (ctr images import) names the image as the kubelet asks
	// for the chart's default.
	if !bytes.Contains(archives[0], []byte(`"io.containerd.image.name":"docker.io/fleetview/fleetview:`+o.Tag+`"`)) {
		t.Errorf("the archive's index.json does not name docker.io/fleetview/fleetview:%s", o.Tag)
	}

	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	plats := map[string]v1.Hash{}
	for _, d := range im.Manifests {
		plats[d.Platform.OS+"/"+d.Platform.Architecture] = d.Digest
	}
	if len(plats) != 2 || plats["linux/amd64"] == (v1.Hash{}) || plats["linux/arm64"] == (v1.Hash{}) {
		t.Fatalf("platforms %v, want linux/amd64 and linux/arm64", plats)
	}
	sizes, err := Sizes(idx)
	if err != nil {
		t.Fatal(err)
	}
	for p, n := range sizes {
		t.Logf("%s: %.1f MB compressed", p, float64(n)/1e6)
		if n > 40e6 {
			t.Errorf("%s: %d bytes compressed, over the 40 MB target", p, n)
		}
	}

	for p, d := range plats {
		img, err := idx.Image(d)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS+"/"+cf.Architecture != p {
			t.Errorf("%s: config says %s/%s", p, cf.OS, cf.Architecture)
		}
		if cf.Config.User != "65532:65532" {
			t.Errorf("%s: user %q, want 65532:65532 (non-root)", p, cf.Config.User)
		}
		if strings.Join(cf.Config.Entrypoint, " ") != "/usr/local/bin/fleetview" {
			t.Errorf("%s: entrypoint %q", p, cf.Config.Entrypoint)
		}
		if !cf.Created.Time.Equal(o.Created) {
			t.Errorf("%s: created %v, want %v", p, cf.Created, o.Created)
		}
	}

	root := t.TempDir()
	amd, err := idx.Image(plats["linux/amd64"])
	if err != nil {
		t.Fatal(err)
	}
	files := extract(t, amd, root)
	for _, want := range []string{"etc/passwd", "etc/group", "etc/ssl/certs/ca-certificates.crt", "usr/local/bin/fleetview", "tmp/"} {
		if _, ok := files[want]; !ok {
			t.Errorf("image lacks %s (has %v)", want, keys(files))
		}
	}
	for f, h := range files {
		if !h.ModTime.Equal(o.Created) {
			t.Errorf("%s: time %v, want the commit's %v", f, h.ModTime, o.Created)
		}
		if strings.HasPrefix(f, "bin/") || strings.HasSuffix(f, "/sh") || strings.Contains(f, "busybox") {
			t.Errorf("image has a shell: %s", f)
		}
	}
	if passwd, _ := os.ReadFile(filepath.Join(root, "etc/passwd")); !strings.Contains(string(passwd), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user 65532:\n%s", passwd)
	}
	if certs, _ := os.ReadFile(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt")); bytes.Count(certs, []byte("BEGIN CERTIFICATE")) < 100 {
		t.Errorf("CA bundle has %d certificates, want the NSS roots (over 100)", bytes.Count(certs, []byte("BEGIN CERTIFICATE")))
	}
	out, err := exec.CommandContext(ctx, filepath.Join(root, "usr/local/bin/fleetview"), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("fleetview version from the image: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "fleetview 0.0.0-imagetest commit "+o.Commit) {
		t.Fatalf("fleetview version printed %q, want the stamped version and commit", out)
	}

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/fleetview/fleetview:test"
	if err := Push(ctx, ref, idx); err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Index(r, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if gd, _ := got.Digest(); gd != digests[0] {
		t.Fatalf("registry serves %s, pushed %s", gd, digests[0])
	}
}

// extract unpacks img's layers under root and returns each entry's header.
func extract(t *testing.T, img v1.Image, root string) map[string]*tar.Header {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*tar.Header{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = h
			p := filepath.Join(root, h.Name)
			switch h.Typeflag {
			case tar.TypeDir:
				if err := os.MkdirAll(p, 0o755); err != nil {
					t.Fatal(err)
				}
			case tar.TypeReg:
				b, err := io.ReadAll(tr)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, b, os.FileMode(h.Mode)); err != nil {
					t.Fatal(err)
				}
			default:
				t.Errorf("unexpected entry %s type %c", h.Name, h.Typeflag)
			}
		}
		rc.Close()
	}
	return files
}

func keys(m map[string]*tar.Header) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
