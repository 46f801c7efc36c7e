"""Events: the outbox, subscriptions, signed delivery with retries, and the events' own
retention. The events are written by the statements that make the changes they describe."""
