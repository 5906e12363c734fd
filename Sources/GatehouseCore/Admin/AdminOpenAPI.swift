/// The OpenAPI 3.1 description served at `GET /admin/openapi.json`.
enum AdminOpenAPI {
  static let document = """
    {"openapi":"3.1.0","info":{"title":"Gatehouse admin API","version":"1"},"paths":{}}
    """
}
