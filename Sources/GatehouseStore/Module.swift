/// The SQLite store: cached answers and token states.
public enum GatehouseStoreModule {}
