package kubeapi

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fleetview/fleetview/queryapi/apierr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors of the Kubernetes API layer; toKubeStatus maps them (and
// gRPC statuses from the query services) to Kubernetes Status bodies.
var (
	// ErrUnknownResource: no cluster reports the resource as cached.
	ErrUnknownResource = errors.New("the server could not find the requested resource")
	// ErrBadRequest: a query parameter or path is invalid.
	ErrBadRequest = errors.New("bad request")
	// ErrMethodNotAllowed: fleetview is a read-only cache.
	ErrMethodNotAllowed = errors.New("the server does not allow this method on the requested resource: fleetview is a read-only cache")
	// ErrNotAcceptable: Accept names no encoding the resource is served in
	// (protobuf alone for a custom resource, a Table in protobuf).
	ErrNotAcceptable = errors.New("the requested media type is not acceptable")
	// ErrRelayLimit: a forwarded request would pass a bound of the
	// requests in flight through the relay (relaylimit.go).
	ErrRelayLimit = errors.New("too many forwarded requests in flight")
	// ErrInvalidListPolicy: a ListPolicy that cannot be applied.
	ErrInvalidListPolicy = errors.New("invalid list policy")
)

// toKubeStatus is the Status body of err. gr and name, when known, fill the
// details kubectl prints ("pods \"x\" not found").
func toKubeStatus(err error, gr schema.GroupResource, name string) *metav1.Status {
	st := kubeStatus(err, gr, name)
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	return st
}

func kubeStatus(err error, gr schema.GroupResource, name string) *metav1.Status {
	switch {
	case errors.Is(err, ErrUnknownResource):
		st := apierrors.NewNotFound(gr, name).Status()
		st.Message = err.Error()
		return &st
	case errors.Is(err, ErrMethodNotAllowed):
		st := apierrors.NewMethodNotSupported(gr, "write").Status()
		st.Message = ErrMethodNotAllowed.Error()
		return &st
	case errors.Is(err, ErrNotAcceptable):
		// As k8s.io/apiserver's negotiation answers it.
		return &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotAcceptable, Reason: metav1.StatusReasonNotAcceptable, Message: err.Error()}
	case errors.Is(err, ErrBadRequest):
		st := apierrors.NewBadRequest(err.Error()).Status()
		return &st
	}
	s, ok := status.FromError(err)
	if !ok {
		st := apierrors.NewInternalError(err).Status()
		return &st
	}
	// The same table as every other boundary (queryapi/apierr).
	m := apierr.OfStatus(s)
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: s.Message(), Reason: metav1.StatusReason(m.Reason), Code: int32(m.HTTP),
	}
	if gr.Resource != "" {
		st.Details = &metav1.StatusDetails{Group: gr.Group, Kind: gr.Resource, Name: name}
	}
	if s.Code() == codes.NotFound && name != "" {
		st.Message = fmt.Sprintf("%s %q not found", gr.String(), name)
	}
	return &st
}
