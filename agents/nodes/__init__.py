"""The graph's nodes, one module each: baseline, planner, coder, judge, profiler."""
