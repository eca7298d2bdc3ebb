package citustest

import (
	"regexp"
	"strconv"
	"strings"
)

// Routing is what Citus's EXPLAIN of a statement says of how it runs it.
type Routing struct {
	// Pulled: an INSERT … SELECT whose rows pass through the coordinator.
	Pulled bool
	// Subplans: recursive planning, steps whose rows pass through the
	// coordinator.
	Subplans bool
	// Tasks: the task count of each distributed scan, in plan order.
	Tasks []int
}

var taskCountRE = regexp.MustCompile(`Task Count: (\d+)`)

// ReadRouting reads Routing from the text of a Citus EXPLAIN.
func ReadRouting(plan string) Routing {
	r := Routing{
		Pulled:   strings.Contains(plan, "pull to coordinator"),
		Subplans: strings.Contains(plan, "Distributed Subplan"),
	}
	for _, m := range taskCountRE.FindAllStringSubmatch(plan, -1) {
		n, _ := strconv.Atoi(m[1]) // \d+: always a number
		r.Tasks = append(r.Tasks, n)
	}
	return r
}

// Verdict words r: what passes through the coordinator, then each task
// count (all of them, or with oneTaskToo false only those other than 1),
// joined by ", "; empty when there is nothing to say.
func (r Routing) Verdict(oneTaskToo bool) string {
	var parts []string
	if r.Pulled {
		parts = append(parts, "pulled to the coordinator")
	}
	if r.Subplans {
		parts = append(parts, "subplans")
	}
	for _, n := range r.Tasks {
		if n != 1 || oneTaskToo {
			parts = append(parts, "tasks: "+strconv.Itoa(n))
		}
	}
	return strings.Join(parts, ", ")
}
