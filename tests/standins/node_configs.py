"""What a real node (tests/standins/node.py) is made of, as pure functions: containerd's config, the
CNI network, the kubelet's and kube-proxy's configurations, and the pause image's archive.

Each setting that these machines require says why next to it (KUBELET.md of issue 32 has the
study): ``restrict_oom_score_adj`` (root lacks CAP_SYS_RESOURCE), ``failCgroupV1: false`` and
``cgroupfs`` (cgroup v1, no systemd), the pause image built from source (no registry).
"""

from __future__ import annotations

import json
import platform
import tarfile
from hashlib import sha256
from io import BytesIO
from pathlib import Path
from typing import Any

POD_CIDR = "10.244.77.0/24"
SERVICE_CIDR = "10.0.0.0/24"  # as tests/standins/controlplane.py's API server
KUBERNETES_SERVICE_IP = "10.0.0.1"
PAUSE_TAG = "localhost/pause:3.10.2-local"


def containerd_config(d: Path, socket: Path, cni_bin: Path, cni_conf: Path) -> str:
    """containerd with its own root, state, socket, runc root and ``opt`` under ``d``: nothing
    shared with another containerd of the machine (Docker Engine's)."""
    return f'''version = 2
root = "{d / "root"}"
state = "{d / "state"}"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{d / "opt"}"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "{PAUSE_TAG}"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    # root here lacks CAP_SYS_RESOURCE: runc cannot set an oom_score_adj below containerd's own
    # (the pause container asks for -998) and every sandbox fails with "can't get final
    # child's PID from pipe: EOF"; this clamps it
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "{d / "runc"}"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "{cni_bin}"
      conf_dir = "{cni_conf}"
      max_conf_num = 1
'''


def cni_config(host: str, bridge: str, ipam_dir: Path) -> dict[str, Any]:
    """A bridge with host-local addresses in :data:`POD_CIDR`; routes only to the Pods, the
    Services and the host: no default route, no masquerade, every address on this machine."""
    return {
        "cniVersion": "1.0.0",
        "name": "k8s-event-bridge-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam_dir),
                    "ranges": [[{"subnet": POD_CIDR}]],
                    "routes": [{"dst": POD_CIDR}, {"dst": SERVICE_CIDR}, {"dst": f"{host}/32"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "loopback"},
        ],
    }


def kubelet_config(
    *,
    host: str,
    port: int,
    healthz_port: int,
    socket: Path,
    serving: tuple[Path, Path],
    client_ca: Path,
    pod_logs: Path,
) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,  # these machines are cgroup v1 (the kubelet warns it will go)
        "cgroupDriver": "cgroupfs",  # PID 1 is not systemd
        "containerRuntimeEndpoint": f"unix://{socket}",
        "address": host,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(serving[0]),
        "tlsPrivateKeyFile": str(serving[1]),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDomain": "cluster.local",
        "failSwapOn": False,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "registerNode": True,
        # the images are imported, never pulled: never collect them, evict only on a full disk
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
        },
        "podLogsDir": str(pod_logs),
    }


def kube_proxy_config(
    *, host: str, node_name: str, kubeconfig: Path, metrics_port: int, healthz_port: int
) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node_name,
        "clusterCIDR": POD_CIDR,
        "bindAddress": host,
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "nodePortAddresses": [f"{host}/32"],
        # leave the host's conntrack table size and timeouts as they are
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }


def image_archive(path: Path, tag: str, files: dict[str, bytes], config: dict[str, Any]) -> Path:
    """A one-layer image archive in ``docker save``'s format (``ctr images import`` reads it):
    ``files`` (name -> content, mode 0755) as the layer, ``config`` as the image's config."""
    layer = BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, BytesIO(data))
    layer_bytes = layer.getvalue()
    diff_id = sha256(layer_bytes).hexdigest()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    cfg = json.dumps(
        {
            "architecture": arch,
            "os": "linux",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        }
    ).encode()
    cfg_name = f"{sha256(cfg).hexdigest()}.json"
    manifest = [{"Config": cfg_name, "RepoTags": [tag], "Layers": [f"{diff_id}/layer.tar"]}]
    members = {
        f"{diff_id}/layer.tar": layer_bytes,
        cfg_name: cfg,
        "manifest.json": json.dumps(manifest).encode(),
    }
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, BytesIO(data))
    return path


def pause_archive(path: Path, binary: bytes) -> Path:
    """The pause image (``FROM scratch``, the static ``/pause``, user 65535) as
    ``build/pause/Dockerfile`` of kubernetes makes it."""
    return image_archive(
        path, PAUSE_TAG, {"pause": binary}, {"Entrypoint": ["/pause"], "User": "65535:65535"}
    )
