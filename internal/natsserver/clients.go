package natsserver

import "github.com/nats-io/nats.go"

// ClientOptions are how a member cluster's collector connects with its
// credentials: its user, and the inbox prefix its account may receive
// replies on. It then reaches the hub's JetStream at APIPrefix
// (jetstream.NewWithAPIPrefix), the only JetStream its account sees.
func (u ClusterUser) ClientOptions() []nats.Option {
	return []nats.Option{nats.UserInfo(u.Cluster, u.Password), nats.CustomInboxPrefix(InboxPrefix(u.Cluster))}
}

// hubClientOptions are the credentials the hub's own components present:
// HubUser with the hub password under per-cluster accounts, the shared
// token, or none.
func (o Options) hubClientOptions() []nats.Option {
	switch {
	case len(o.Clusters) > 0:
		return []nats.Option{nats.UserInfo(HubUser, o.HubPassword)}
	case o.Token != "":
		return []nats.Option{nats.Token(o.Token)}
	}
	return nil
}

// ConnectHub connects one of the hub's own components with the hub's
// credentials. With TLS it connects in process (ConnectInProcess): nothing
// to encrypt, and the serving certificate need not name a loopback
// address. Without it, it keeps the loopback TCP connection (ClientURL)
// the hub's components always had.
func (s *Server) ConnectHub(opts ...nats.Option) (*nats.Conn, error) {
	opts = append(opts, s.hubOpts...)
	if s.tls {
		return s.ConnectInProcess(opts...)
	}
	return nats.Connect(s.ClientURL(), opts...)
}
