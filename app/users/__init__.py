"""Users: the people whose sessions (and memories) Switchboard keeps."""
