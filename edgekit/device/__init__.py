"""The device side: loading a package and predicting (runtime.py, model.py, streaming.py), device
facts and profiles (devices.py, profile_store.py), the local caches (cache.py, compiled_cache.py,
prediction_cache.py), package files and signatures (package_io.py, signing.py) and the tuned
choice (tune.py, tuned.py). Nothing here imports the build side or the commands."""
