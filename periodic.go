package ax

// startPeriodic starts the periodic-schedule loop (Every); stopPeriodic
// stops it and waits. Placeholders until periodic jobs land.
func (r *runtime) startPeriodic() {}

func (r *runtime) stopPeriodic() {}
