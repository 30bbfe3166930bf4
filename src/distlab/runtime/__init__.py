"""The distributed runtime every rank stands on: ``Runtime`` (process group, device, collectives) and the samplers
that split the data over ranks."""
