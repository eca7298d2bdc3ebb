package pgstore

// BatchSQL returns the batched statements TestGenericPlansAreLinear plans,
// by name.
func (s *Store) BatchSQL() map[string]string {
	return map[string]string{
		"claim":      s.q.claim,
		"finish":     s.q.finish,
		"extend":     s.q.extend,
		"insertMany": s.q.insertMany,
		"rescue":     s.q.rescue,
		"prune":      s.q.prune,
	}
}
