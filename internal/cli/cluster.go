package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/internal/clusterstate"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// clusterFlags are how the cluster tools (verify, explain pod, status,
// rollout) reach a cluster.
type clusterFlags struct {
	kubeconfig, context, webhookConfigName string
	// operatorNamespace is where the operator keeps the Sidecars' revisions.
	operatorNamespace string
}

func (c *clusterFlags) bind(f *pflag.FlagSet) {
	f.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file; empty follows $KUBECONFIG, ~/.kube/config, then the in-cluster config")
	f.StringVar(&c.context, "context", "", "kubeconfig context to use")
	f.StringVar(&c.webhookConfigName, "webhook-config-name", webhookconfig.DefaultName, "MutatingWebhookConfiguration the operator keeps")
	f.StringVar(&c.operatorNamespace, "operator-namespace", "sidecar-operator-system",
		"where the operator keeps the Sidecars' revisions, of which a rollout may still serve an older one")
}

func (c *clusterFlags) clientConfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.context})
}

// namespace is flag, else the namespace of the kubeconfig's context, else
// default, as kubectl picks it.
func (c *clusterFlags) namespace(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	ns, _, err := c.clientConfig().Namespace()
	if clientcmd.IsEmptyConfig(err) {
		return "default", nil
	}
	return ns, err
}

// config loads the client configuration the way kubectl does.
func (c *clusterFlags) config() (*rest.Config, error) {
	cfg, err := c.clientConfig().ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		// client-go's own words suggest KUBERNETES_MASTER, which nothing reads.
		return nil, errors.New("no kubeconfig: --kubeconfig, $KUBECONFIG and ~/.kube/config name none, and this is not a pod in a cluster")
	}
	if err != nil {
		return nil, fmt.Errorf("loading the client configuration (--kubeconfig, --context): %w", err)
	}
	return cfg, nil
}

func (c *clusterFlags) client() (client.Client, error) {
	cfg, err := c.config()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme.New()})
}

func (c *clusterFlags) loader(cl client.Reader) *clusterstate.Loader {
	return &clusterstate.Loader{Reader: cl, WebhookConfigName: c.webhookConfigName, PageSize: 500, OperatorNamespace: c.operatorNamespace}
}
