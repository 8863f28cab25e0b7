# shellcheck shell=bash
# The cluster's certificates, service-account keys and kubeconfigs, made with
# openssl. Sourced by cluster.sh after common.sh. Nothing is regenerated once
# it exists, so `up` is idempotent and clients keep working across restarts.
#
# Layout under $PKI:
#   ca.{crt,key}              cluster CA: API server, kubelets, clients
#   front-proxy-ca.{crt,key}  request-header CA for the aggregation layer
#   sa.{key,pub}              service-account token signing key
#   <name>.{crt,key}          leaf certificates, one per identity

# issue_cert NAME CA SUBJECT EXTKEYUSAGE [SAN,...]
#   e.g. issue_cert admin ca "/O=system:masters/CN=kubernetes-admin" clientAuth
issue_cert() {
    local name=$1 ca=$2 subject=$3 usage=$4 sans=${5:-}
    [[ -s "$PKI/$name.crt" && -s "$PKI/$name.key" ]] && return 0
    local ext
    ext=$(mktemp)
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$usage"
        [[ -n "$sans" ]] && echo "subjectAltName=$sans"
    } >"$ext"
    openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key" 2>/dev/null
    openssl req -new -key "$PKI/$name.key" -subj "$subject" -out "$PKI/$name.csr" 2>/dev/null
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" \
        -CAcreateserial -days 3650 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null ||
        die "could not issue the certificate $name"
    rm -f "$PKI/$name.csr" "$ext"
    chmod 600 "$PKI/$name.key"
}

make_ca() {
    local name=$1 cn=$2
    [[ -s "$PKI/$name.crt" && -s "$PKI/$name.key" ]] && return 0
    openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key" 2>/dev/null
    openssl req -x509 -new -key "$PKI/$name.key" -subj "/CN=$cn" -days 3650 \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign" \
        -out "$PKI/$name.crt" 2>/dev/null || die "could not create the CA $name"
    chmod 600 "$PKI/$name.key"
}

# write_kubeconfig FILE CERT_NAME [SERVER]
write_kubeconfig() {
    local file=$1 cert=$2 server=${3:-https://$NODE_NET.1:$APISERVER_PORT}
    [[ -s "$file" ]] && return 0
    cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: ferrovirt
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $cert
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/$cert.crt")
    client-key-data: $(base64 -w0 <"$PKI/$cert.key")
contexts:
- name: ferrovirt
  context:
    cluster: ferrovirt
    user: $cert
current-context: ferrovirt
EOF
    chmod 600 "$file"
}

make_control_plane_pki() {
    mkdir -p "$PKI" "$KCFG"
    chmod 700 "$PKI"
    make_ca ca ferrovirt-ca
    make_ca front-proxy-ca ferrovirt-front-proxy-ca
    if [[ ! -s "$PKI/sa.key" ]]; then
        openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
        openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
        chmod 600 "$PKI/sa.key"
    fi
    local svc=kubernetes.default.svc
    issue_cert apiserver ca "/CN=kube-apiserver" serverAuth \
        "DNS:kubernetes,DNS:kubernetes.default,DNS:$svc,DNS:$svc.$CLUSTER_DOMAIN,DNS:localhost,IP:127.0.0.1,IP:$KUBERNETES_SVC_IP,IP:$NODE_NET.1"
    issue_cert apiserver-kubelet-client ca "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
    issue_cert front-proxy-client front-proxy-ca "/CN=front-proxy-client" clientAuth
    issue_cert admin ca "/O=system:masters/CN=kubernetes-admin" clientAuth
    issue_cert controller-manager ca "/CN=system:kube-controller-manager" clientAuth
    issue_cert scheduler ca "/CN=system:kube-scheduler" clientAuth
    issue_cert kube-proxy ca "/CN=system:kube-proxy" clientAuth
    write_kubeconfig "$ADMIN_KUBECONFIG" admin
    write_kubeconfig "$KCFG/controller-manager.kubeconfig" controller-manager
    write_kubeconfig "$KCFG/scheduler.kubeconfig" scheduler
    write_kubeconfig "$KCFG/kube-proxy.kubeconfig" kube-proxy
}

# make_node_pki NAME IP: the kubelet's client identity and serving certificate.
make_node_pki() {
    local name=$1 ip=$2
    issue_cert "kubelet-$name" ca "/O=system:nodes/CN=system:node:$name" clientAuth
    issue_cert "kubelet-$name-serving" ca "/CN=$name" serverAuth "DNS:$name,IP:$ip"
    write_kubeconfig "$KCFG/kubelet-$name.kubeconfig" "kubelet-$name"
}
