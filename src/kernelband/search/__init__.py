"""The search: strategies, proposers, policies, the run store and the optimize loop."""
