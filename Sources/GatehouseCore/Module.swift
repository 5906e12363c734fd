/// Config, routing and the proxy flow of Gatehouse.
public enum GatehouseCoreModule {}
