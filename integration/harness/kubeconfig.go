package harness

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kubeconfig returns a kubeconfig with one cluster, user and context per
// member cluster, each context named after its cluster; the current context
// is the first cluster. user is "admin" or "collector".
func (f *Fleet) Kubeconfig(user string) (*clientcmdapi.Config, error) {
	if user != "admin" && user != "collector" {
		return nil, fmt.Errorf("harness: kubeconfig user %q: want \"admin\" or \"collector\"", user)
	}
	cfg := clientcmdapi.NewConfig()
	for _, c := range f.clusters {
		cl := clientcmdapi.NewCluster()
		cl.Server = c.URL
		if c.Insecure {
			cl.InsecureSkipTLSVerify = true
		} else {
			cl.CertificateAuthorityData = append([]byte(nil), c.CAData...)
		}
		cfg.Clusters[c.Name] = cl

		ai := clientcmdapi.NewAuthInfo()
		ai.Token = c.AdminToken
		if user == "collector" {
			ai.Token = c.CollectorToken
		}
		authName := c.Name + "-" + user
		cfg.AuthInfos[authName] = ai

		ctx := clientcmdapi.NewContext()
		ctx.Cluster = c.Name
		ctx.AuthInfo = authName
		cfg.Contexts[c.Name] = ctx
		if cfg.CurrentContext == "" {
			cfg.CurrentContext = c.Name
		}
	}
	return cfg, nil
}

// WriteKubeconfig writes Kubeconfig(user) to path (mode 0600).
func (f *Fleet) WriteKubeconfig(path string, user string) error {
	cfg, err := f.Kubeconfig(user)
	if err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}
