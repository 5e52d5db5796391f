module spotshift.local/noop-extender

go 1.26
