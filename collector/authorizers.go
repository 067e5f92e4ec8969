package collector

import (
	"context"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/internal/inventory"
)

// rulesReviewNamespace is the namespace the collector's
// SelfSubjectRulesReview names: the review requires one, and every
// cluster has it. Whether a rule resolver can list rules does not depend
// on the namespace.
const rulesReviewNamespace = "default"

// checkAuthorization asks the member, as the collector, for its own rules
// (SelfSubjectRulesReview) and records what the answer says of the
// member's authorizers for the inventory. kube-apiserver's answer is
// incomplete when an authorizer in its chain cannot list rules: a webhook
// always (upstream's WebhookAuthorizer.RulesFor), the Node authorizer
// only for system:node identities, which a collector is not; RBAC always
// lists them. The hub's member RBAC mirrors RBAC alone, so an incomplete
// answer means the member may allow more than fleetview shows. A failed
// review keeps the previous answer (a transient error should not flap the
// mark); none yet leaves it unknown.
func (c *Collector) checkAuthorization(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	review, err := c.kube.AuthorizationV1().SelfSubjectRulesReviews().Create(rctx, &authorizationv1.SelfSubjectRulesReview{
		Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: rulesReviewNamespace},
	}, metav1.CreateOptions{})
	if err != nil {
		c.mu.Lock()
		known := c.authorization != ""
		c.mu.Unlock()
		if !known {
			c.log.Warn("member authorizers unknown: SelfSubjectRulesReview failed", "err", err)
		}
		return
	}
	got := authorizationOf(review.Status)
	c.mu.Lock()
	changed := got != c.authorization
	c.authorization = got
	c.mu.Unlock()
	if changed {
		c.log.Info("member authorizers", "authorization", got, "evaluationError", cut(review.Status.EvaluationError, 256))
	}
}

// authorizationOf reads a SelfSubjectRulesReview's status as an
// inventory.Cluster.Authorization value.
func authorizationOf(st authorizationv1.SubjectRulesReviewStatus) string {
	if st.Incomplete {
		return inventory.AuthorizationRBACAndOthers
	}
	return inventory.AuthorizationRBAC
}
