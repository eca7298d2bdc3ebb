// Package citusconformance runs the store conformance suite and the
// model-based test on pgstore's Citus store (pgstore.NewCitus), with one
// shard and with eight, against the Citus cluster AX_CITUS_URL names
// (internal/citustest). They are a package of their own, beside pgstore's
// tests, so that each has go test's time budget to itself.
package citusconformance
