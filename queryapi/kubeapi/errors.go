package kubeapi

import (
	"errors"
	"fmt"
	"net/http"

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
)

// codeTable translates gRPC codes from the query services once: the HTTP
// status and the Kubernetes Status reason kubectl and client-go act on
// (client-go relists on Expired/Gone, kubectl prints "Error from server
// (Reason)").
var codeTable = map[codes.Code]struct {
	http   int
	reason metav1.StatusReason
}{
	codes.NotFound:           {http.StatusNotFound, metav1.StatusReasonNotFound},
	codes.Aborted:            {http.StatusConflict, metav1.StatusReasonConflict},
	codes.FailedPrecondition: {http.StatusConflict, metav1.StatusReasonConflict},
	codes.AlreadyExists:      {http.StatusConflict, metav1.StatusReasonAlreadyExists},
	codes.InvalidArgument:    {http.StatusBadRequest, metav1.StatusReasonBadRequest},
	codes.OutOfRange:         {http.StatusGone, metav1.StatusReasonExpired},
	codes.Unauthenticated:    {http.StatusUnauthorized, metav1.StatusReasonUnauthorized},
	codes.PermissionDenied:   {http.StatusForbidden, metav1.StatusReasonForbidden},
	codes.ResourceExhausted:  {http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests},
	codes.DeadlineExceeded:   {http.StatusGatewayTimeout, metav1.StatusReasonTimeout},
	codes.Unavailable:        {http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable},
	codes.Unimplemented:      {http.StatusNotImplemented, metav1.StatusReasonMethodNotAllowed},
	codes.Canceled:           {499, metav1.StatusReasonUnknown},
}

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
	case errors.Is(err, ErrBadRequest):
		st := apierrors.NewBadRequest(err.Error()).Status()
		return &st
	}
	s, ok := status.FromError(err)
	if !ok {
		st := apierrors.NewInternalError(err).Status()
		return &st
	}
	m, ok := codeTable[s.Code()]
	if !ok {
		m.http, m.reason = http.StatusInternalServerError, metav1.StatusReasonInternalError
	}
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: s.Message(), Reason: m.reason, Code: int32(m.http),
	}
	if gr.Resource != "" {
		st.Details = &metav1.StatusDetails{Group: gr.Group, Kind: gr.Resource, Name: name}
	}
	if s.Code() == codes.NotFound && name != "" {
		st.Message = fmt.Sprintf("%s %q not found", gr.String(), name)
	}
	return &st
}
