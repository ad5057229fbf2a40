"""The search: config, Tune space, Optuna searcher, MLflow tracking and the CLI around
`Tuner.fit`. Entry point: `python -m search.run --config configs/cats_dogs.yaml`."""
