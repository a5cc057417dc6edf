"""What a test cloud of today's nova needs besides nova and Placement.

Runs with the python of the nova venv (standard library only, so that it
also imports under any other interpreter):

    <venv>/bin/python novacloud_stubs.py wsgi nova|placement --port P
        nova's or Placement's WSGI application in a threaded ``wsgiref``
        server (neither ships a console script: they are WSGI apps).
        nova's application parses ``sys.argv`` when it is imported, so the
        arguments are reset before; the config directories come from
        ``OS_NOVA_CONFIG_DIR`` / ``OS_PLACEMENT_CONFIG_DIR``.
    <venv>/bin/python novacloud_stubs.py services --port P
        The glance and neutron stubs on one port (glance under ``/v2/``,
        neutron under ``/v2.0/``).

``auth_filter_factory`` is the paste filter that stands in for
keystonemiddleware's ``authtoken`` in nova-api's pipeline (nova 34 has no
noauth2): it sets the headers keystonemiddleware sets for a confirmed
token, an admin of the project ``X-Project-Id`` (default
``ADMIN_PROJECT``), unless the caller sent its own.
"""

from __future__ import annotations

import argparse
import json
import re
import socketserver
import sys
import threading
import uuid
from wsgiref import simple_server

ADMIN_PROJECT = "6f70656e737461636b20697320636f6f"
ADMIN_USER = "8d1d6a9e7e0e4a0bb1e5b1c4f0e0a001"
IMAGE_ID = "155d900f-4e14-4e4c-a73d-069cbf4541e6"
# Images with properties, by id (any other id is the plain image): what
# nova reads from glance, e.g. required traits (test_nova_cloud_placement).
IMAGE_PROPERTIES = {
    "6a2b7c1e-8d4f-4f0a-9c3e-2b1d5e7f9a01": {"trait:HW_CPU_X86_AVX2": "required"},
    # A Xen image: nova's fake drivers offer only the "fake" hypervisor
    # type, so ImagePropertiesFilter refuses every host (a rebuild onto it
    # fails, test_nova_cloud_moves).
    "c0ffee00-7e1d-4b0a-8f5e-3a9d2c6b1e02": {"hypervisor_type": "xen"},
}
# A second plain image (any id not above is one), for a rebuild that
# changes the image and nothing the hosts are judged on.
REBUILD_IMAGE_ID = "b1d9e5a0-4c3f-4e2a-9d7b-8f6e5d4c3b03"


# -- keystone ---------------------------------------------------------------
def auth_filter_factory(global_conf, **local_conf):
    """paste.filter_factory: keystonemiddleware's headers without keystone."""
    def _filter(app):
        def _call(environ, start_response):
            defaults = {
                "HTTP_X_IDENTITY_STATUS": "Confirmed",
                "HTTP_X_USER_ID": ADMIN_USER,
                "HTTP_X_USER_NAME": "admin",
                "HTTP_X_PROJECT_ID": ADMIN_PROJECT,
                "HTTP_X_PROJECT_NAME": "admin",
                "HTTP_X_USER_DOMAIN_ID": "default",
                "HTTP_X_PROJECT_DOMAIN_ID": "default",
                "HTTP_X_ROLES": "admin,member,reader",
                "HTTP_X_AUTH_TOKEN": "admin",
            }
            for key, value in defaults.items():
                environ.setdefault(key, value)
            environ["HTTP_X_IDENTITY_STATUS"] = "Confirmed"
            environ["HTTP_X_SERVICE_IDENTITY_STATUS"] = "Invalid"
            return app(environ, start_response)
        return _call
    return _filter


# -- glance and neutron -----------------------------------------------------
def _image(image_id: str) -> dict:
    return {
        "id": image_id, "name": "cirros", "status": "active",
        "visibility": "public", "protected": False, "os_hidden": False,
        "container_format": "bare", "disk_format": "raw",
        "size": 1024, "virtual_size": None, "min_ram": 0, "min_disk": 0,
        "checksum": None, "os_hash_algo": None, "os_hash_value": None,
        "owner": ADMIN_PROJECT, "tags": [],
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
        "self": f"/v2/images/{image_id}", "file": f"/v2/images/{image_id}/file",
        "schema": "/v2/schemas/image",
        # glance lists an image's properties as keys of the image itself.
        **IMAGE_PROPERTIES.get(image_id, {}),
    }


# glanceclient keeps as the image's own attributes only the schema's
# properties (the rest become image properties): list every base key.
_IMAGE_SCHEMA = {"name": "image", "additionalProperties": {"type": "string"},
                 "properties": {key: {} for key in _image(IMAGE_ID)}, "links": []}


def services_app(environ, start_response):
    """Glance: any image id is one active raw image (new ones made and
    deleted as nova asks, none kept); neutron: nothing."""
    path = environ.get("PATH_INFO", "")
    method = environ.get("REQUEST_METHOD", "GET")

    def reply(status, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        headers = [("Content-Length", str(len(data)))]
        if body is not None:
            headers.append(("Content-Type", "application/json"))
        start_response(status, headers)
        return [data]

    if path.startswith("/v2/"):                     # glance
        if path == "/v2/schemas/image":
            return reply("200 OK", _IMAGE_SCHEMA)
        match = re.fullmatch(r"/v2/images/([^/]+)", path)
        if match and method == "GET":
            return reply("200 OK", _image(match.group(1)))
        # A snapshot (nova-api's shelve makes one for the compute to fill;
        # the fake drivers upload nothing, unshelve boots from it and
        # deletes it): any new image is the plain image under a new id.
        if path == "/v2/images" and method == "POST":
            environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            return reply("201 Created", _image(str(uuid.uuid4())))
        if match and method == "DELETE":
            return reply("204 No Content")
        if path == "/v2/images" and method == "GET":
            return reply("200 OK", {"images": [_image(IMAGE_ID)],
                                    "schema": "/v2/schemas/images"})
        return reply("404 Not Found", {"message": f"no {path} in this stub"})
    if path.startswith("/v2.0/"):                   # neutron
        parts = [p for p in path[len("/v2.0/"):].split("/") if p]
        if method == "GET" and len(parts) == 1:
            name = parts[0].removesuffix(".json").replace("-", "_")
            return reply("200 OK", {name: []})
        if method == "DELETE":
            return reply("204 No Content")
        return reply("404 Not Found", {"NeutronError": {
            "type": "NotFound", "message": f"no {path} in this stub", "detail": ""}})
    if path in ("", "/"):
        return reply("200 OK", {"versions": []})
    return reply("404 Not Found", {"message": f"no {path} in this stub"})


# -- the server ---------------------------------------------------------------
class _ThreadingServer(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class _Handler(simple_server.WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base's name)
        sys.stderr.write("%s %s\n" % (self.log_date_time_string(), format % args))


def serve(app, port: int) -> None:
    server = simple_server.make_server("127.0.0.1", port, app,
                                       server_class=_ThreadingServer,
                                       handler_class=_Handler)
    print(f"serving on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    server.serve_forever()


def load_app(name: str):
    if name == "nova":
        sys.argv = ["nova-api-os-compute"]
        from nova.wsgi import osapi_compute
        return osapi_compute.application
    if name == "placement":
        sys.argv = ["placement-api"]
        from placement.wsgi import api
        return api.application
    raise SystemExit(f"unknown application {name}")


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="what", required=True)
    wsgi = sub.add_parser("wsgi")
    wsgi.add_argument("app", choices=["nova", "placement"])
    wsgi.add_argument("--port", type=int, required=True)
    services = sub.add_parser("services")
    services.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    if args.what == "wsgi":
        app = load_app(args.app)
    else:
        app = services_app
    # Signals stop the process at once: nothing here holds state.
    threading.current_thread().name = f"{args.what}-{args.port}"
    serve(app, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
