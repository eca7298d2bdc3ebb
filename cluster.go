package ax

// startCluster starts node registration and leader election; stopCluster
// stops them, releasing leadership and marking the node stopped.
// Placeholders until cluster membership lands.
func (r *runtime) startCluster() {}

func (r *runtime) stopCluster() {}
