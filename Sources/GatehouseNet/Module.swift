/// Sockets, event loops and timers for Gatehouse.
public enum GatehouseNetModule {}
