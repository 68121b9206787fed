"""The data contract as pyarrow schemas, Parquet writers, and the store-directory reader."""
