"""COMPARE: two runs -> what changed, finding the runs, the comparison rendered."""
