package main

// historyFlags turn the hub's history on explicitly (the flags' defaults
// too), with a window longer than the run.
func historyFlags() []string {
	return []string{"--history-retention", "24h", "--history-max-bytes", "4294967296"}
}
