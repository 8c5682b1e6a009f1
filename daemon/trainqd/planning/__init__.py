"""Planning: the pure scheduling decision, its inputs, the queue's order and sharing policy."""
