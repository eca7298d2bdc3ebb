package pgstore

// FlowSQL returns the flow-control statements TestFlowStatementsRunWithoutJIT
// looks for among the plans, by name.
func (s *Store) FlowSQL() map[string]string {
	q := s.flowQ()
	return map[string]string{"flow claim": q.claim, "flow next": q.next, "flow finish": q.finish}
}
