"""solkit.scale: long jobs spread over local devices (a process per device, work stealing) and Ray."""
