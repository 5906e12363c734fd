/// gzip decoding and encoding over zlib.
public enum GatehouseCompressionModule {}
