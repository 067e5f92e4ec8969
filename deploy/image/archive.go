package image

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// containerdImageName is the annotation containerd's importer names an
// image by (ctr images import); without it the archive's image has no name.
const containerdImageName = "io.containerd.image.name"

// WriteArchiveFile writes idx as an OCI image layout archive to path,
// naming it ref (repository:tag), atomically.
func WriteArchiveFile(path, ref string, idx v1.ImageIndex, created time.Time) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".image-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := WriteArchive(tmp, ref, idx, created); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// WriteArchive writes idx as an OCI image layout (oci-layout, index.json,
// blobs/sha256/...) in a tar, entries sorted, every time created: the
// archive of one commit is byte for byte the same. index.json names the
// image both ways importers read: the OCI ref.name (the tag) and
// containerd's full name (docker.io/... for a Docker Hub name, as the
// kubelet asks for it).
func WriteArchive(w io.Writer, ref string, idx v1.ImageIndex, created time.Time) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("%w: image name %q: %v", ErrInvalidOptions, ref, err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	size, err := idx.Size()
	if err != nil {
		return err
	}
	top := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{{
		MediaType: types.OCIImageIndex, Digest: digest, Size: size,
		Annotations: map[string]string{
			"org.opencontainers.image.ref.name": tag.TagStr(),
			containerdImageName:                 containerdName(tag),
		},
	}}}
	indexJSON, err := json.Marshal(top)
	if err != nil {
		return err
	}
	blobs, err := collectBlobs(idx)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json": indexJSON,
	}
	for h, b := range blobs {
		files["blobs/sha256/"+h.Hex] = b
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tar.NewWriter(w)
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: created}); err != nil {
			return err
		}
	}
	for _, n := range names {
		b := files[n]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(b)), ModTime: created}); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	return tw.Close()
}

// containerdName is the name containerd and the kubelet use: Docker Hub is
// docker.io (go-containerregistry says index.docker.io), and its one-word
// repositories are under library/.
func containerdName(t name.Tag) string {
	reg := t.RegistryStr()
	if reg == name.DefaultRegistry {
		reg = "docker.io"
	}
	return reg + "/" + t.RepositoryStr() + ":" + t.TagStr()
}

// collectBlobs is every blob of idx by digest: its own manifest, and each
// image's manifest, config and (compressed) layers.
func collectBlobs(idx v1.ImageIndex) (map[v1.Hash][]byte, error) {
	blobs := map[v1.Hash][]byte{}
	raw, err := idx.RawManifest()
	if err != nil {
		return nil, err
	}
	d, err := idx.Digest()
	if err != nil {
		return nil, err
	}
	blobs[d] = raw
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, desc := range im.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return nil, err
		}
		if blobs[desc.Digest], err = img.RawManifest(); err != nil {
			return nil, err
		}
		cn, err := img.ConfigName()
		if err != nil {
			return nil, err
		}
		if blobs[cn], err = img.RawConfigFile(); err != nil {
			return nil, err
		}
		layers, err := img.Layers()
		if err != nil {
			return nil, err
		}
		for _, l := range layers {
			ld, err := l.Digest()
			if err != nil {
				return nil, err
			}
			if _, ok := blobs[ld]; ok {
				continue
			}
			rc, err := l.Compressed()
			if err != nil {
				return nil, err
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				return nil, err
			}
			blobs[ld] = b
		}
	}
	return blobs, nil
}

// Push writes idx to ref (REGISTRY/REPO:TAG), with the credentials of the
// default keychain (~/.docker/config.json and credential helpers). Over
// plain HTTP only for a registry on localhost/127.0.0.1, as go-containerregistry
// decides.
func Push(ctx context.Context, ref string, idx v1.ImageIndex) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("%w: --push %q: %v", ErrInvalidOptions, ref, err)
	}
	return remote.WriteIndex(r, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain))
}

// Sizes is each platform's compressed size: manifest, config and layers,
// what a node pulls.
func Sizes(idx v1.ImageIndex) (map[string]int64, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, desc := range im.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return nil, err
		}
		m, err := img.Manifest()
		if err != nil {
			return nil, err
		}
		n := desc.Size + m.Config.Size
		for _, l := range m.Layers {
			n += l.Size
		}
		out[desc.Platform.OS+"/"+desc.Platform.Architecture] = n
	}
	return out, nil
}
