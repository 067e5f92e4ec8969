package app

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// restConfig loads a kubeconfig context, or the in-cluster config when
// kubeconfig is empty and we run in a pod.
func restConfig(kubeconfig, context string) (*rest.Config, error) {
	if kubeconfig == "" && context == "" {
		if c, err := rest.InClusterConfig(); err == nil {
			return c, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	raw, err := rules.Load()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %q: %w", kubeconfig, err)
	}
	if context != "" {
		if _, ok := raw.Contexts[context]; !ok {
			return nil, fmt.Errorf("%w: context %q not found in kubeconfig %s", ErrInvalidOptions, context, describe(kubeconfig))
		}
	}
	c, err := clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig context %q: %w", context, err)
	}
	return c, nil
}

func describe(kubeconfig string) string {
	if kubeconfig == "" {
		return "(default loading rules)"
	}
	return kubeconfig
}
