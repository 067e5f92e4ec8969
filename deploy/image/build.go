package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

const (
	// UID and GID the image runs as (distroless's "nonroot").
	UID = 65532
	GID = 65532
	// BinDir holds the binary; it is the entrypoint.
	BinDir = "/usr/local/bin"
	// CACertsPath is where the CA bundle is (Debian's path, which Go reads).
	CACertsPath = "/etc/ssl/certs/ca-certificates.crt"
)

// Build compiles the binary for every platform and assembles the image
// index. o must be completed and valid.
func Build(ctx context.Context, o Options) (v1.ImageIndex, error) {
	base, err := baseLayer(o)
	if err != nil {
		return nil, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	tmp, err := os.MkdirTemp("", "fleetview-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin := path.Base(o.Package)
	for _, p := range o.Platforms {
		goos, arch, _ := strings.Cut(p, "/")
		out := filepath.Join(tmp, goos+"-"+arch, bin)
		if err := goBuild(ctx, o, goos, arch, out); err != nil {
			return nil, err
		}
		img, err := platformImage(o, base, out, goos, arch)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: goos, Architecture: arch}}})
	}
	return idx, nil
}

// goBuild builds a static, path-free binary whose bytes depend only on the
// source, the toolchain and the stamped version and commit.
func goBuild(ctx context.Context, o Options, goos, arch, out string) error {
	ld := fmt.Sprintf("-s -w -X main.version=%s -X main.commit=%s", o.Version, o.Commit)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ld, "-o", out, o.Package)
	cmd.Dir = o.Dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+arch, "GOFLAGS=-mod=readonly")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w for %s/%s: %v\n%s", ErrBuild, goos, arch, err, b)
	}
	return nil
}

// entry is one file or directory of a layer.
type entry struct {
	name string
	mode int64
	uid  int
	body []byte // nil: a directory
}

// baseLayer is what every platform shares: the user, its home, /tmp and the
// CA bundle.
func baseLayer(o Options) (v1.Layer, error) {
	certs, err := caBundle()
	if err != nil {
		return nil, err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", UID, GID)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", GID)
	return layer(o, []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: strings.TrimPrefix(CACertsPath, "/"), mode: 0o644, body: certs},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: UID},
		{name: "tmp/", mode: 0o1777},
	})
}

// caBundle is the NSS roots without extra constraints as PEM: a PEM file
// cannot carry a distrust date, so constrained roots are left out rather
// than trusted beyond it.
func caBundle() ([]byte, error) {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		if err := pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}); err != nil {
			return nil, err
		}
	}
	if b.Len() == 0 {
		return nil, fmt.Errorf("the CA bundle module has no roots")
	}
	return b.Bytes(), nil
}

func platformImage(o Options, base v1.Layer, binPath, goos, arch string) (v1.Image, error) {
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return nil, err
	}
	name := filepath.Base(binPath)
	binLayer, err := layer(o, []entry{
		{name: "usr/", mode: 0o755},
		{name: "usr/local/", mode: 0o755},
		{name: "usr/local/bin/", mode: 0o755},
		{name: strings.TrimPrefix(BinDir, "/") + "/" + name, mode: 0o755, body: bin},
	})
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	created := v1.Time{Time: o.Created}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{Created: created, CreatedBy: "fleetview image: user nonroot, CA certificates"}},
		mutate.Addendum{Layer: binLayer, MediaType: types.OCILayer, History: v1.History{Created: created, CreatedBy: "fleetview image: " + BinDir + "/" + name + " " + o.Version}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = goos, arch, created
	cf.Config.Entrypoint = []string{BinDir + "/" + name}
	cf.Config.User = fmt.Sprintf("%d:%d", UID, GID)
	cf.Config.WorkingDir = "/home/nonroot"
	cf.Config.Env = []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=" + CACertsPath, "HOME=/home/nonroot"}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":    name,
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.revision": o.Commit,
		"org.opencontainers.image.source":   "https://github.com/fleetview/fleetview",
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	return mutate.ConfigFile(img, cf)
}

// layer is a gzipped tar of entries, sorted by name, every time the
// image's, owned by root unless said otherwise.
func layer(o Options, entries []entry) (v1.Layer, error) {
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: o.Created, Format: tar.FormatPAX}
		if e.body == nil {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.body))
		}
		// PAX would otherwise record access and change times (zero here,
		// but explicit is cheaper than wondering).
		h.AccessTime, h.ChangeTime = time.Time{}, time.Time{}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	// Compressed once here: given gzip, go-containerregistry keeps it as the
	// layer's blob instead of compressing again on every read (digest,
	// archive, push), which for the binary's layer cost minutes.
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	b := gz.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}
