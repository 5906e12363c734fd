/// Byte-level JSON validation and extraction for the envelope.
public enum GatehouseJSONModule {}
