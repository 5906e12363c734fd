/// The dashboard page served at `GET /admin/`: one self-contained HTML document.
enum AdminDashboard {
  static let html = """
    <!doctype html>
    <html lang="en"><head><meta charset="utf-8"><title>Gatehouse</title></head>
    <body><h1>Gatehouse</h1><p>Admin dashboard.</p></body></html>
    """
}
