// swift-tools-version:6.0
import PackageDescription

// No package dependencies: everything is built on the toolchain and Debian C libraries.

/// Release builds of the request-path modules skip dynamic exclusivity checks: the loops
/// confine every mutable object to one thread, and the checks cost a runtime call per class
/// property access on the hot path. Debug builds (and so the tests) keep them.
let hotPathSettings: [SwiftSetting] = [.unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release))]
let package = Package(
  name: "Gatehouse",
  products: [
    .executable(name: "gatehouse", targets: ["gatehouse"]),
    // Preloaded into the gateway by the allocation tests (LD_PRELOAD); nothing links it.
    .library(name: "GatehouseAllocationCounter", type: .dynamic, targets: ["GatehouseAllocationCounter"]),
  ],
  targets: [
    .target(name: "CGatehouseLinux"),
    .target(name: "GatehouseAllocationCounter"),
    .systemLibrary(
      name: "CGatehouseOpenSSL",
      providers: [.apt(["libssl-dev"])]
    ),
    .systemLibrary(
      name: "CGatehouseSQLite",
      providers: [.apt(["libsqlite3-dev"])]
    ),
    .systemLibrary(
      name: "CGatehouseZlib",
      providers: [.apt(["zlib1g-dev"])]
    ),
    .systemLibrary(
      name: "CGatehouseNghttp2",
      providers: [.apt(["libnghttp2-dev"])]
    ),
    // hiredis's RESP reader for the shared tier (Docs/shared-tier.md); its sockets and event API are not used.
    .systemLibrary(
      name: "CGatehouseHiredis",
      providers: [.apt(["libhiredis-dev"])]
    ),
    // c-ares for GatehouseResolver: asynchronous DNS driven by our loops (sockets and timeouts).
    .systemLibrary(
      name: "CGatehouseCares",
      providers: [.apt(["libc-ares-dev"])]
    ),
    .target(name: "GatehouseHTTP", swiftSettings: hotPathSettings),
    .target(
      name: "GatehouseNet",
      dependencies: ["CGatehouseLinux", "CGatehouseOpenSSL"],
      swiftSettings: hotPathSettings
    ),
    // Host names to addresses with TTLs, asynchronously on a loop (c-ares, never getaddrinfo).
    .target(
      name: "GatehouseResolver",
      dependencies: ["GatehouseNet", "CGatehouseCares"]
    ),
    .target(
      name: "GatehouseHTTPServer",
      dependencies: ["GatehouseHTTP", "GatehouseNet", "CGatehouseNghttp2"],
      swiftSettings: hotPathSettings
    ),
    .target(name: "GatehouseJSON"),
    .target(
      name: "GatehouseLogging",
      dependencies: ["GatehouseJSON"],
      swiftSettings: hotPathSettings
    ),
    // Values read on the request path (route templates, trusted proxies) live here, hence
    // the hot-path settings.
    .target(
      name: "GatehouseConfig",
      dependencies: ["GatehouseHTTP", "GatehouseJSON", "GatehouseLogging", "GatehouseJWT"],
      swiftSettings: hotPathSettings
    ),
    // The admin API: routing, authorization, audit, dashboard and sessions. It reaches the
    // running gateway only through `AdminBackend`, which GatehouseCore implements.
    .target(
      name: "GatehouseAdmin",
      dependencies: [
        "GatehouseHTTP", "GatehouseHTTPServer", "GatehouseNet", "GatehouseJSON", "GatehouseLogging", "GatehouseConfig",
        "CGatehouseOpenSSL",
      ]
    ),
    // Bearer JWT verification (Docs/jwt.md): pure functions over bytes and OpenSSL keys, no I/O.
    .target(
      name: "GatehouseJWT",
      dependencies: ["GatehouseJSON", "CGatehouseOpenSSL"],
      swiftSettings: hotPathSettings
    ),
    .target(
      name: "GatehouseStore",
      dependencies: ["CGatehouseSQLite", "CGatehouseOpenSSL"]
    ),
    // The shared tier's Redis/Valkey client: RESP over GatehouseNet connections, on the loops.
    .target(
      name: "GatehouseSharedTier",
      dependencies: ["GatehouseNet", "GatehouseConfig", "CGatehouseHiredis"],
      swiftSettings: hotPathSettings
    ),
    .target(
      name: "GatehouseCompression",
      dependencies: ["CGatehouseZlib"]
    ),
    .target(
      name: "GatehouseCore",
      dependencies: [
        "GatehouseHTTP", "GatehouseHTTPServer", "GatehouseNet", "GatehouseJSON", "GatehouseLogging", "GatehouseConfig",
        "GatehouseAdmin", "GatehouseCompression", "GatehouseStore", "GatehouseJWT", "GatehouseSharedTier",
        "GatehouseResolver", "CGatehouseOpenSSL",
      ],
      swiftSettings: hotPathSettings
    ),
    .executableTarget(
      name: "gatehouse",
      dependencies: [
        "GatehouseHTTP", "GatehouseNet", "GatehouseJSON", "GatehouseLogging", "GatehouseConfig", "GatehouseCore",
      ]
    ),
    // The store's crash-test workload: writes until killed, then verifies the file.
    .executableTarget(
      name: "GatehouseStoreCrashWriter",
      dependencies: ["GatehouseStore"]
    ),
    .executableTarget(
      name: "GatehouseBench",
      dependencies: ["GatehouseHTTP", "GatehouseJSON"],
      path: "Bench/GatehouseBench"
    ),
    .testTarget(
      name: "GatehouseHTTPTests",
      dependencies: ["GatehouseHTTP"]
    ),
    .testTarget(
      name: "GatehouseNetTests",
      dependencies: ["GatehouseNet", "GatehouseResolver"]
    ),
    .testTarget(
      name: "GatehouseHTTPServerTests",
      dependencies: ["GatehouseHTTPServer", "GatehouseHTTP", "GatehouseNet", "CGatehouseNghttp2"]
    ),
    .testTarget(
      name: "GatehouseJSONTests",
      dependencies: ["GatehouseJSON", "GatehouseCompression"]
    ),
    .testTarget(
      name: "GatehouseJWTTests",
      dependencies: ["GatehouseJWT", "GatehouseJSON", "CGatehouseOpenSSL"]
    ),
    .testTarget(
      name: "GatehouseStoreTests",
      dependencies: ["GatehouseStore"]
    ),
    .testTarget(
      name: "GatehouseConfigTests",
      dependencies: ["GatehouseConfig", "GatehouseLogging", "GatehouseJSON"]
    ),
    .testTarget(
      name: "GatehouseAdminTests",
      dependencies: ["GatehouseAdmin", "GatehouseLogging", "GatehouseJSON", "GatehouseNet", "GatehouseHTTP"]
    ),
    .testTarget(
      name: "GatehouseCoreTests",
      dependencies: [
        "GatehouseCore", "GatehouseAdmin", "GatehouseConfig", "GatehouseLogging", "GatehouseJSON", "GatehouseHTTP",
      ]
    ),
    .testTarget(
      name: "GatehouseSharedTierTests",
      dependencies: ["GatehouseSharedTier", "GatehouseNet", "GatehouseConfig", "CGatehouseHiredis"]
    ),
    .testTarget(
      name: "GatehouseIntegrationTests",
      dependencies: ["GatehouseHTTP"]
    ),
    .testTarget(
      name: "CLibrariesTests",
      dependencies: ["CGatehouseOpenSSL", "CGatehouseSQLite", "CGatehouseZlib", "CGatehouseLinux", "CGatehouseNghttp2"]
    ),
  ],
  swiftLanguageModes: [.v6]
)
