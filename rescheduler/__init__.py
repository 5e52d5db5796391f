"""spotshift rescheduler: plans and performs safe drains of on-demand nodes onto spot."""
