package webhook

import "crypto/tls"

// tls12Suites are the TLS 1.2 suites served: ECDHE for forward secrecy and
// AEAD ciphers only, none of the CBC-SHA1 ones Go would otherwise offer.
// TLS 1.3's suites are all AEAD, and Go does not let them be chosen.
var tls12Suites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// ServerTLSConfig is the TLS policy of every port that serves TLS: TLS 1.3
// whenever the client offers it (Go prefers the highest version both
// share), otherwise TLS 1.2 with tls12Suites.
func ServerTLSConfig() *tls.Config {
	c := &tls.Config{}
	HardenTLS(c)
	return c
}

// HardenTLS applies the policy to a config, also one another library made,
// such as the metrics server's.
func HardenTLS(c *tls.Config) {
	c.MinVersion, c.CipherSuites = tls.VersionTLS12, tls12Suites
}
