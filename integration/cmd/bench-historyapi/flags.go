package main

// historyFlags turn the hub's history on (--history; off by default)
// with a window longer than the run.
func historyFlags() []string {
	return []string{"--history", "--history-retention", "24h", "--history-max-bytes", "4294967296"}
}
