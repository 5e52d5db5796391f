"""spotshift predicate library: pure functions with kube-scheduler semantics over the API's JSON."""
