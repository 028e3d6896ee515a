"""Combining workers' learners: averaging at the end of a pass, mixing during a pass, the
chain (one learner handed from worker to worker), and VW's spanning-tree server."""
