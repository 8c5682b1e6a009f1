"""Access: who may do what, who a uid is, and what a submission must satisfy before it is queued."""
