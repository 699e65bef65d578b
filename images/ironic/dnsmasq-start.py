#!/usr/bin/python3
"""DHCP and TFTP for network boot on the provisioning network (container of Deployment
ironic-dnsmasq, deployed at boot only when the site names a provisioning network).

It answers only on $PROVISIONING_INTERFACE, from the range $DHCP_RANGE (first-last). The
nodes get this address as their router and name server: the provisioning network of an
offline site has no other, and the installed nodes need both (flannel picks the interface
of the default route; CoreDNS needs an upstream). The name server knows one name, the
appliance's (APPLIANCE_NAME: the name its registry certificate and the BPA's
configuration use), and forwards nothing. A machine's firmware gets iPXE over TFTP (BIOS:
undionly.kpxe; UEFI: snponly.efi, from Debian's ipxe); iPXE then gets Ironic's boot.ipxe over HTTP from the boot-file
server on $PROVISIONING_IP:6180, which sends each node where Ironic wants it.
"""
import ipaddress
import os
import sys

APPLIANCE_NAME = "bootstrap.icn"


def fail(message):
    print(f"ironic-dnsmasq: {message}", file=sys.stderr)
    sys.exit(2)


def setting(name):
    value = os.environ.get(name, "").strip()
    if not value:
        fail(f"${name} is not set: the provisioning network is off (site.yaml 'provisioning:'), and this container runs only when it is on")
    return value


interface = setting("PROVISIONING_INTERFACE")
address = ipaddress.ip_interface(setting("PROVISIONING_ADDRESS"))
first, _, last = setting("DHCP_RANGE").partition("-")
for value in (first, last):
    if ipaddress.ip_address(value) not in address.network:
        fail(f"DHCP range {first}-{last} is not inside the provisioning network {address.network}")
http_port = os.environ.get("IRONIC_HTTP_PORT", "6180")
state = os.environ.get("DNSMASQ_STATE_DIR", "/var/lib/dnsmasq")
os.makedirs(state, exist_ok=True)

conf = f"""# Written by dnsmasq-start from the site's provisioning settings.
pid-file=
no-resolv
no-hosts
host-record={APPLIANCE_NAME},{address.ip}
interface={interface}
bind-dynamic
except-interface=lo
dhcp-range={first},{last},{address.network.netmask},1h
dhcp-authoritative
# One address per NIC: the deploy ramdisk and the installed OS send different client ids,
# and the address inspection recorded (HardwareData, the BPA's inventory) must stay the node's.
dhcp-ignore-clid
dhcp-leasefile={state}/dnsmasq.leases
dhcp-option=option:router,{address.ip}
dhcp-option=option:dns-server,{address.ip}
log-dhcp
enable-tftp
tftp-root=/usr/lib/ipxe
dhcp-match=set:ipxe,175
dhcp-userclass=set:ipxe,iPXE
dhcp-match=set:efi,option:client-arch,7
dhcp-match=set:efi,option:client-arch,9
dhcp-boot=tag:!ipxe,tag:!efi,undionly.kpxe
dhcp-boot=tag:!ipxe,tag:efi,snponly.efi
dhcp-boot=tag:ipxe,http://{address.ip}:{http_port}/boot.ipxe
"""
path = os.path.join(state, "dnsmasq.conf")
with open(path, "w") as f:
    f.write(conf)
print(f"ironic-dnsmasq: DHCP {first}-{last}, TFTP and DNS ({APPLIANCE_NAME} only) on {interface} ({address}); iPXE chains to http://{address.ip}:{http_port}/boot.ipxe", flush=True)
os.execv("/usr/sbin/dnsmasq", ["dnsmasq", "--keep-in-foreground", "--log-facility=-", f"--conf-file={path}", "--user=root", "--group=root"])
