package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fleetview/fleetview/internal/hubclient"
)

// KubeconfigOptions configure `fleetview kubeconfig`: a kubeconfig whose
// "fleet" context is the fleet view and whose per-cluster contexts are the
// /clusters/{name} views, with the caller's credentials.
type KubeconfigOptions struct {
	// Server is the query API's HTTP base URL.
	Server string
	// TokenFile is referenced (not copied) by the kubeconfig, so a rotated
	// token keeps working.
	TokenFile string
	// CAFile verifies a TLS server; Insecure skips verification.
	CAFile   string
	Insecure bool
	// Output is the file to write; empty or "-" is stdout.
	Output string
}

// AddFlags registers the flags.
func (o *KubeconfigOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Server, "server", "http://127.0.0.1:8080", "HTTP(S) URL of the query API")
	fs.StringVar(&o.TokenFile, "token-file", "", "file holding the bearer token (one of --token-auth-file's tokens); referenced by the kubeconfig")
	fs.StringVar(&o.CAFile, "certificate-authority", "", "CA of the query API's serving certificate")
	fs.BoolVar(&o.Insecure, "insecure-skip-tls-verify", false, "do not verify the query API's certificate")
	fs.StringVarP(&o.Output, "output", "o", "", "file to write (default stdout)")
}

// Validate reports every problem at once.
func (o *KubeconfigOptions) Validate() []error {
	var errs []error
	u, err := url.Parse(o.Server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("%w: --server %q must be an http(s) URL", ErrInvalidOptions, o.Server))
	}
	for flag, f := range map[string]string{"--token-file": o.TokenFile, "--certificate-authority": o.CAFile} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %v", ErrInvalidOptions, flag, err))
		}
	}
	return errs
}

// clusterNames asks the query API which member clusters it knows, with the
// same credentials the kubeconfig will carry.
func (o *KubeconfigOptions) clusterNames(ctx context.Context) ([]string, error) {
	c, err := hubclient.New(&rest.Config{Host: o.Server, BearerTokenFile: o.TokenFile,
		TLSClientConfig: rest.TLSClientConfig{CAFile: o.CAFile, Insecure: o.Insecure}})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidOptions, err)
	}
	var body struct {
		Clusters []struct {
			Name string `json:"name"`
		} `json:"clusters"`
	}
	if err := c.Get(ctx, "/v1/clusters", nil, &body); err != nil {
		return nil, fmt.Errorf("list clusters: %w", err)
	}
	var names []string
	for _, c := range body.Clusters {
		names = append(names, c.Name)
	}
	return names, nil
}

// BuildKubeconfig is the kubeconfig for the given member clusters.
func (o *KubeconfigOptions) BuildKubeconfig(clusters []string) (*clientcmdapi.Config, error) {
	cfg := clientcmdapi.NewConfig()
	user := clientcmdapi.NewAuthInfo()
	if o.TokenFile != "" {
		abs, err := filepath.Abs(o.TokenFile)
		if err != nil {
			return nil, err
		}
		user.TokenFile = abs
	}
	cfg.AuthInfos["fleetview"] = user
	base := strings.TrimSuffix(o.Server, "/")
	add := func(name, server string) error {
		c := clientcmdapi.NewCluster()
		c.Server = server
		c.InsecureSkipTLSVerify = o.Insecure
		if o.CAFile != "" {
			abs, err := filepath.Abs(o.CAFile)
			if err != nil {
				return err
			}
			c.CertificateAuthority = abs
		}
		cfg.Clusters[name] = c
		ctx := clientcmdapi.NewContext()
		ctx.Cluster, ctx.AuthInfo = name, "fleetview"
		cfg.Contexts[name] = ctx
		return nil
	}
	if err := add("fleet", base); err != nil {
		return nil, err
	}
	for _, name := range clusters {
		if name == "fleet" {
			return nil, fmt.Errorf("%w: a member cluster named %q would shadow the fleet context", ErrInvalidOptions, name)
		}
		if err := add(name, base+"/clusters/"+url.PathEscape(name)); err != nil {
			return nil, err
		}
	}
	cfg.CurrentContext = "fleet"
	return cfg, nil
}

// RunKubeconfig writes the kubeconfig.
func RunKubeconfig(ctx context.Context, o KubeconfigOptions, stdout io.Writer) error {
	if errs := o.Validate(); len(errs) > 0 {
		return errors.Join(errs...)
	}
	names, err := o.clusterNames(ctx)
	if err != nil {
		return err
	}
	cfg, err := o.BuildKubeconfig(names)
	if err != nil {
		return err
	}
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	if o.Output == "" || o.Output == "-" {
		_, err = stdout.Write(b)
		return err
	}
	return os.WriteFile(o.Output, b, 0o600)
}
