# SPDX-License-Identifier: MIT
# Debian packages, made with CPack from a build (`cpack --config BUILD/CPackConfig.cmake`, which
# scripts/test-packages.sh runs and checks), one per install component:
#   locksmith               (cli) the command, its manual page, bash completion, an example config
#   liblocksmith<SOVERSION> (lib) the shared library and the strategy modules it opens at first
#                           use; the modules' client libraries are Recommends, not Depends
#   liblocksmith-dev        (dev) headers, CMake package, pkg-config file, conformance kit
# Every package gets /usr/share/doc/<package>/copyright (machine-readable, from LICENSE) and
# changelog.Debian.gz; the dependencies are computed with dpkg-shlibdeps. The install prefix of
# the build does not matter: the packages install under /usr, with the build's library folder
# (lib/<multiarch> on Debian, see CMakeLists.txt).
set(LOCKSMITH_DEB_MAINTAINER
    "Seed 231bd328 maintainers <maintainers@users.noreply.a-seed-231bd328.example>"
    CACHE STRING "Maintainer of the Debian packages (Name <address>)")
set(LOCKSMITH_DEB_RELEASE 1 CACHE STRING "Debian revision of the packages (the -N of 1.0.0-N)")

set(deb_version ${PROJECT_VERSION}-${LOCKSMITH_DEB_RELEASE})
set(deb_lib liblocksmith${PROJECT_VERSION_MAJOR})  # the SONAME's number (SOVERSION)
set(deb_dir ${PROJECT_BINARY_DIR}/debian)

# The copyright file in the machine-readable format, from LICENSE: the licence's text as the
# License field's body (each line indented by one space, an empty line as " .").
file(READ ${PROJECT_SOURCE_DIR}/LICENSE license)
if(NOT license MATCHES "Copyright \\(c\\) ([^\n]+)\n\n(.*)$")
  message(FATAL_ERROR "LICENSE: no 'Copyright (c) ...' line followed by the licence text")
endif()
set(holder "${CMAKE_MATCH_1}")
string(STRIP "${CMAKE_MATCH_2}" body)
string(REPLACE "\n\n" "\n.\n" body "${body}")
string(REPLACE "\n" "\n " body "${body}")
file(CONFIGURE OUTPUT ${deb_dir}/copyright CONTENT
"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: ${PROJECT_NAME}
Upstream-Contact: ${LOCKSMITH_DEB_MAINTAINER}

Files: *
Copyright: ${holder}
License: MIT
 ${body}
")

# changelog.Debian.gz: one entry for the version; the changes themselves are the upstream
# changelog (CHANGELOG.md, installed as changelog.gz). The date is SOURCE_DATE_EPOCH's when set.
string(TIMESTAMP deb_date "%a, %d %b %Y %H:%M:%S +0000" UTC)
file(CONFIGURE OUTPUT ${deb_dir}/changelog.Debian CONTENT
"${PROJECT_NAME} (${deb_version}) unstable; urgency=medium

  * Packaged with CPack from the ${PROJECT_NAME} ${PROJECT_VERSION} source tree.
  * The changes are in /usr/share/doc/locksmith/changelog.gz.

 -- ${LOCKSMITH_DEB_MAINTAINER}  ${deb_date}
")
execute_process(COMMAND gzip -9nc ${deb_dir}/changelog.Debian
                OUTPUT_FILE ${deb_dir}/changelog.Debian.gz COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND gzip -9nc ${PROJECT_SOURCE_DIR}/CHANGELOG.md
                OUTPUT_FILE ${deb_dir}/changelog.gz COMMAND_ERROR_IS_FATAL ANY)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/CHANGELOG.md)

# Only in component installs (CPack's), not in `cmake --install`'s.
foreach(pair IN ITEMS cli:locksmith lib:${deb_lib} dev:liblocksmith-dev)
  string(REPLACE ":" ";" pair "${pair}")
  list(GET pair 0 component)
  list(GET pair 1 package)
  install(FILES ${deb_dir}/copyright ${deb_dir}/changelog.Debian.gz
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${package}
          COMPONENT ${component} EXCLUDE_FROM_ALL)
endforeach()
install(FILES ${deb_dir}/changelog.gz DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/locksmith
        COMPONENT cli EXCLUDE_FROM_ALL)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ${PROJECT_NAME})
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL cli lib dev)
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/packages)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE ${LOCKSMITH_DEB_RELEASE})
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${LOCKSMITH_DEB_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SOURCE ${PROJECT_NAME})
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Our own library, for dpkg-shlibdeps to find (the packages name it themselves, at this version).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR}/${CMAKE_INSTALL_LIBDIR})

set(CPACK_DEBIAN_CLI_PACKAGE_NAME locksmith)
set(CPACK_DEBIAN_CLI_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_CLI_DESCRIPTION "named locks for shell scripts, cron jobs and services
locksmith runs a command while it holds a named lock, like flock(1), on the
best strategy available: a lock file, a System V semaphore, shared memory,
or a Redis, Memcached, PostgreSQL, MariaDB, etcd or ZooKeeper server shared
by several hosts. Lock rules in /etc/locksmith/config.json choose the
strategy per lock name.")
set(CPACK_DEBIAN_CLI_PACKAGE_SUGGESTS liblocksmith-dev)

set(CPACK_DEBIAN_LIB_PACKAGE_NAME ${deb_lib})
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
# Only the library has a SONAME: its shlibs file says which package provides it.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# dpkg-shlibdeps on the library alone (Depends) and on the modules (Recommends): run in
# the CPack project file below, since CPack would make every module's client library a Depends.
set(CPACK_DEBIAN_LIB_PACKAGE_SHLIBDEPS OFF)
# ldconfig runs on the trigger (lintian wants it; CPack 3.25 only writes a postinst calling it).
file(CONFIGURE OUTPUT ${deb_dir}/triggers CONTENT "activate-noawait ldconfig\n")
set(CPACK_DEBIAN_LIB_PACKAGE_CONTROL_EXTRA ${deb_dir}/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_LIB_DESCRIPTION "named locks on the best available strategy (C++20 library)
locksmith chooses a lock mechanism by the capabilities a lock needs
(exclusive, shared, blocking, expiring, remote) among lock files, System V
semaphores, shared memory and Redis, Memcached, PostgreSQL, MariaDB, etcd and
ZooKeeper servers. The remote strategies are modules loaded at their first
use; their client libraries are recommended, and a strategy whose library is
missing reports so when it is chosen.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME liblocksmith-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${deb_lib} (= ${deb_version}), nlohmann-json3-dev (>= 3.10)")
set(CPACK_DEBIAN_DEV_DESCRIPTION "named locks on the best available strategy (development files)
Headers, CMake package (find_package(locksmith)) and pkg-config file of the
locksmith library, and the conformance kit for strategy plugin authors:
the locksmith::conformance library and the locksmith-conformance program.")

# The command links the library dynamically when a module's client library has no archive
# (cli/CMakeLists.txt); then it needs this package's library too.
if(TARGET locksmith_cli AND NOT LOCKSMITH_CLI_STATIC)
  set(CPACK_DEBIAN_CLI_PACKAGE_DEPENDS "${deb_lib} (= ${deb_version})")
endif()

get_property(modules GLOBAL PROPERTY LOCKSMITH_MODULES)
set(module_files "")
foreach(name IN LISTS modules)
  list(APPEND module_files "$<TARGET_FILE:locksmith_${name}>")
endforeach()
set(CPACK_PROJECT_CONFIG_FILE ${PROJECT_BINARY_DIR}/LocksmithCPackOptions.cmake)
file(GENERATE OUTPUT ${CPACK_PROJECT_CONFIG_FILE} CONTENT
"# Generated by cmake/LocksmithPackaging.cmake; read by cpack.
set(LOCKSMITH_LIBRARY_FILE \"$<TARGET_FILE:locksmith>\")
set(LOCKSMITH_MODULE_FILES \"${module_files}\")
set(LOCKSMITH_LIBRARY_DIR \"${PROJECT_BINARY_DIR}/${CMAKE_INSTALL_LIBDIR}\")
set(LOCKSMITH_SHLIBDEPS_DIR \"${deb_dir}/shlibdeps\")
set(LOCKSMITH_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
include(\"${PROJECT_SOURCE_DIR}/cmake/LocksmithCPackOptions.cmake\")
")
include(CPack)
