// intentionally empty: see Cargo.toml
