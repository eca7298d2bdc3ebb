// Package capabilities checks the README's table of what each store can
// do against the interfaces the stores implement (capabilities_test.go),
// so that the table cannot drift. It lives in the cmd module because
// that module builds all three stores.
package capabilities
