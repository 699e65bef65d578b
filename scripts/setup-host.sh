#!/usr/bin/env bash
# Installs what building and testing need on a fresh Debian machine: host tools from
# Debian's packages, then the npm dependencies. Idempotent and quick when all is there.
set -euo pipefail
cd "$(dirname "$0")/.."

# command -> Debian package that provides it
declare -A tools=(
  [mmdebstrap]=mmdebstrap [newuidmap]=uidmap [fakeroot]=fakeroot
  [qemu-system-x86_64]=qemu-system-x86 [qemu-img]=qemu-utils
  [grub-mkimage]=grub-common [sgdisk]=gdisk [mkfs.ext4]=e2fsprogs [mkfs.vfat]=dosfstools
  [mcopy]=mtools [zstd]=zstd [skopeo]=skopeo [docker-registry]=docker-registry
  [ansible-playbook]=ansible-core [ansible-inventory]=ansible-core [sshd]=openssh-server
  [ssh]=openssh-client [nginx]=nginx-light [go]=golang-go [ip]=iproute2 [curl]=curl
  [openssl]=openssl [gzip]=gzip [time]=time [chromium]=chromium
  [apt-ftparchive]=apt-utils [gpgv]=gpgv [gpg]=gnupg [xz]=xz-utils [dpkg-deb]=dpkg [xorriso]=xorriso
  [bwrap]=bubblewrap
  # test/integration/firewall.test.ts loads the appliance's ruleset in network namespaces
  [nft]=nftables
  # test/unit/site-secrets.test.ts mounts FAT images (through FUSE where the kernel has no vfat)
  [fusefat]=fusefat
  # npm run e2e:metal3: the emulated servers' libvirt (test/helpers/libvirt.ts)
  [libvirtd]=libvirt-daemon [virsh]=libvirt-clients
  # npm run e2e:developer: the appliance VM's one door out, to the BMC emulator (QEMU guestfwd)
  [socat]=socat
  # test/unit/backup.test.ts: the appliance's backups are age files (icn-backup)
  [age]=age [age-keygen]=age
  # test/unit/secrets-key.test.ts: the Secrets' key sealed to an emulated TPM 2.0 (systemd-creds)
  [swtpm]=swtpm [swtpm_setup]=swtpm-tools [systemd-creds]=systemd
)
# data-only packages, checked by a file they ship
declare -A files=(
  [/usr/lib/grub/i386-pc/boot.img]=grub-pc-bin
  [/usr/lib/grub/x86_64-efi/linux.mod]=grub-efi-amd64-bin
  [/usr/share/OVMF/OVMF_CODE_4M.fd]=ovmf
  [/usr/share/keyrings/debian-archive-keyring.gpg]=debian-archive-keyring
  [/usr/lib/python3/dist-packages/yaml/__init__.py]=python3-yaml
  [/usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so]=libvirt-daemon-driver-qemu
  [/usr/lib/python3/dist-packages/libvirt.py]=python3-libvirt
  [/usr/lib/x86_64-linux-gnu/libtss2-tcti-swtpm.so.0]=libtss2-tcti-swtpm0
  [/usr/lib/x86_64-linux-gnu/libtss2-esys.so.0]=libtss2-esys-3.0.2-0
  [/usr/lib/x86_64-linux-gnu/libtss2-rc.so.0]=libtss2-rc0
  [/usr/lib/x86_64-linux-gnu/libtss2-mu.so.0]=libtss2-mu0
)

missing=()
for cmd in "${!tools[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || missing+=("${tools[$cmd]}")
done
for file in "${!files[@]}"; do
  [ -e "$file" ] || missing+=("${files[$file]}")
done
# pip for the images' PyPI packages runs in a venv (builder/sources/pypi.ts)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)

if [ ${#missing[@]} -gt 0 ]; then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-host: missing host packages: ${missing[*]}" >&2
    echo "  fix: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "setup-host: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup-host: installing npm dependencies (npm ci)" >&2
  npm ci --no-audit --no-fund --loglevel=error
fi
