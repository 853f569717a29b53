"""One engine instance, start to finish: manifests and knobs, the server process, the benchmark."""
