/// The product version, printed by `gatehouse version` and reported by the admin API.
public enum GatehouseVersion {
  public static let string = "0.1.0"
}
