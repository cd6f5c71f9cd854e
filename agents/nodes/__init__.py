"""The graph's nodes, one module each: planner, screen, coder, judge, profiler, finish."""
